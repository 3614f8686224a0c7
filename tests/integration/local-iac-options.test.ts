import { execFileSync, spawnSync } from 'node:child_process';
import { createPrivateKey, createPublicKey, X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { AppError } from '../../shared/platform/errors/app-error';
import { createLocalEngine, type LocalEngine } from '../../local/engine/local-engine';
import type { Plan, ResolveReferences, StackState } from '../../shared/platform/iac/plan';
import type { ProjectFiles } from '../../local/engine/pulumi-yaml';
import { stackStateSchema } from '../../local/cloud/job-target-calls';
import type { StackRef } from '../../shared/platform/iac/stack-ref';
import { sqlStackStates } from '../../local/engine/stack-state.repository';
import type { Run } from '../../shared/provisioning/run';
import { specificationAppliedOf } from '../../shared/provisioning/run-events';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';

/**
 * The local engine applying resource options, get resources, providers and emulated providers to the local cloud:
 * the order of the target's calls (replacements), what stays in the target (retainOnDelete, deletedWith, get),
 * adoption by import, and emulated outputs kept in the state, per tenant.
 */

const noReferences: ResolveReferences = () => Promise.reject(new AppError('GOVERNANCE.SECRET_NOT_FOUND', 'not-found', 'no references in these programs'));
const project = (resources: string, extra = ''): ProjectFiles => ({ 'Pulumi.yaml': `name: shop\nruntime: yaml\n${extra}resources:\n${resources}` });
const ops = (plan: Plan) => plan.steps.map((s) => `${s.op} ${s.name}`);

/** Whether OpenSSH's ssh-keygen is on this machine (the OpenSSH key test reads keys back with it). */
function hasSshKeygen(): boolean {
  // Only a missing program sets `error`; ssh-keygen's own refusal of the empty file is an exit code.
  return spawnSync('ssh-keygen', ['-y', '-f', '/dev/null'], { stdio: 'ignore' }).error === undefined;
}

/** A run of `stack` that applied, as run-events.ts takes one. */
function aRun(stack: StackRef): Run {
  const at = new Date('2026-03-01T10:00:00Z');
  return {
    id: `run-${stack.stack}`,
    seq: 1,
    promotionId: `promotion-${stack.stack}`,
    tenant: stack.tenant,
    environment: { id: `env-${stack.stack}`, name: 'development', tier: 'development' },
    release: { name: 'shop', version: '1.0.0' },
    project: stack.project,
    stack: stack.stack,
    desiredState: { repository: 'https://git.example.com/shop.git', commit: 'a'.repeat(40), path: 'shop' },
    requestedBy: 'delivery-host',
    reason: 'promotion',
    state: 'applied',
    createdAt: at,
    updatedAt: at,
    finishedAt: at,
  };
}

/** The local cloud with a log of its changing calls, and a switch that fails the next delete. */
function recorded(cloud: LocalCloud) {
  const calls: string[] = [];
  let failNextDelete = false;
  const wrapped: LocalCloud = {
    ...cloud,
    create: async (target, resource) => {
      const created = await cloud.create(target, resource);
      calls.push(`create ${resource.urn.split('::').pop()} ${created.id}`);
      return created;
    },
    update: async (target, id, properties) => {
      calls.push(`update ${id}`);
      return cloud.update(target, id, properties);
    },
    delete: async (target, id) => {
      if (failNextDelete) {
        failNextDelete = false;
        throw new AppError('PROVISIONING.TARGET_UNREACHABLE', 'unavailable', 'the target went away for a moment');
      }
      calls.push(`delete ${id}`);
      return cloud.delete(target, id);
    },
  };
  return { cloud: wrapped, calls, failNextDelete: () => void (failNextDelete = true) };
}

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`local IaC engine: resource options on ${dialect}`, () => {
    let database: TestDatabase;
    let clock: ManualClock;
    let cloud: LocalCloud;
    let log: ReturnType<typeof recorded>;
    let engine: LocalEngine;
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
      run++;
      stack = { tenant: 'tenant-a', project: 'shop', stack: `dev-${run}` };
      target = `options-target-${run}`;
      clock = new ManualClock('2026-03-01T10:00:00Z');
      cloud = createLocalCloud({ store: database.store, clock, ids: randomIds });
      log = recorded(cloud);
      engine = createLocalEngine({ store: database.store, clock, ids: randomIds, cloud: log.cloud, targetOf: () => target });
    });

    async function apply(files: ProjectFiles, on: StackRef = stack) {
      const plan = await engine.preview(on, files, {});
      const result = await engine.apply(on, files, {}, plan, noReferences);
      return { plan, result };
    }
    const state = (on: StackRef = stack): Promise<StackState | undefined> => sqlStackStates(database.store, clock).read(on);
    const inTarget = async (name: string) => (await cloud.list(target)).filter((r) => r.urn.endsWith(`::${name}`));

    const bucket = (tier: string, options = '') => `  logs:\n    type: local:storage:Bucket\n    properties:\n      tier: ${tier}\n    options:\n      replaceOnChanges: [tier]\n${options}  app:\n    type: local:web:App\n    properties:\n      logs: \${logs.id}\n`;

    it('when a resource is replaced, then the replacement is created first and the old one deleted after the other steps; with deleteBeforeReplace, deleted first', async () => {
      await apply(project(bucket('hot')));
      const [old] = await inTarget('logs');
      log.calls.length = 0;
      const { plan, result } = await apply(project(bucket('cold')));
      expect(ops(plan)).toEqual(['replace logs', 'update app']);
      expect(result.status).toBe('applied');
      const [replacement] = await inTarget('logs');
      expect(log.calls).toEqual([`create logs ${replacement?.id}`, expect.stringMatching(/^update /), `delete ${old?.id}`]);
      expect((await state())?.resources.map((r) => [r.name, r.id, r.pendingDelete])).toEqual([
        ['logs', replacement?.id, undefined],
        ['app', expect.any(String), undefined],
      ]);

      log.calls.length = 0;
      await apply(project(bucket('warm', '      deleteBeforeReplace: true\n')));
      const [third] = await inTarget('logs');
      expect(log.calls).toEqual([`delete ${replacement?.id}`, `create logs ${third?.id}`, expect.stringMatching(/^update /)]);
      expect(ops(await engine.preview(stack, project(bucket('warm', '      deleteBeforeReplace: true\n')), {}))).toEqual(['same logs', 'same app']);
    });

    it('when the delete of a replaced resource fails, then the state keeps it as pending delete and the next plan deletes it', async () => {
      await apply(project(bucket('hot')));
      const [old] = await inTarget('logs');
      log.failNextDelete();
      const { result } = await apply(project(bucket('cold')));
      expect(result.status).toBe('failed');
      expect(result.resources.map((r) => [r.name, r.status])).toEqual([
        ['logs', 'failed'],
        ['app', 'succeeded'],
      ]);
      expect((await state())?.resources.filter((r) => r.pendingDelete).map((r) => r.id)).toEqual([old?.id]);
      const { plan, result: second } = await apply(project(bucket('cold')));
      expect(plan.steps.map((s) => [s.op, s.name, s.id])).toEqual([
        ['same', 'logs', expect.any(String)],
        ['same', 'app', expect.any(String)],
        ['delete', 'logs', old?.id],
      ]);
      expect(second.status).toBe('applied');
      expect(await cloud.get(target, old!.id)).toBeUndefined();
      expect(await inTarget('logs')).toHaveLength(1);
    });

    it('when a retainOnDelete resource leaves the program, then the target keeps it and the state forgets it; so for a deletedWith resource whose resource goes too', async () => {
      const files = project(`  app:\n    type: local:web:App\n  keep:\n    type: local:storage:Bucket\n    options:\n      retainOnDelete: true\n  child:\n    type: local:storage:Blob\n    options:\n      deletedWith: \${app}\n`);
      await apply(files);
      const ids = Object.fromEntries((await cloud.list(target)).map((r) => [r.urn.split('::').pop(), r.id]));
      expect((await state())?.resources.find((r) => r.name === 'child')?.deletedWith).toBe(`urn:pulumi:${stack.stack}::shop::local:web:App::app`);
      log.calls.length = 0;
      const { plan, result } = await apply(project(`  other:\n    type: local:a:B\n`));
      expect(plan.steps.map((s) => [s.op, s.name, s.retain])).toEqual([
        ['create', 'other', undefined],
        ['delete', 'child', 'deletedWith'],
        ['delete', 'keep', 'retainOnDelete'],
        ['delete', 'app', undefined],
      ]);
      expect(result.status).toBe('applied');
      expect(log.calls.filter((c) => c.startsWith('delete'))).toEqual([`delete ${ids.app}`]);
      expect(await cloud.get(target, ids.keep)).toBeDefined();
      expect(await cloud.get(target, ids.child)).toBeDefined();
      expect((await state())?.resources.map((r) => r.name)).toEqual(['other']);
    });

    it('when a resource is renamed with an alias, then it keeps its id in the target and the state takes the new urn', async () => {
      await apply(project(`  logs:\n    type: local:storage:Bucket\n    properties: { tier: hot }\n`));
      const [before] = await inTarget('logs');
      log.calls.length = 0;
      const renamed = project(`  archive:\n    type: local:storage:Bucket\n    properties: { tier: hot }\n    options:\n      aliases:\n        - name: logs\n`);
      const { plan, result } = await apply(renamed);
      expect(plan.steps.map((s) => [s.op, s.name, s.id, s.oldUrn])).toEqual([['same', 'archive', before?.id, `urn:pulumi:${stack.stack}::shop::local:storage:Bucket::logs`]]);
      expect(result.status).toBe('applied');
      expect(log.calls).toEqual([]);
      expect((await state())?.resources.map((r) => [r.name, r.urn, r.id])).toEqual([['archive', `urn:pulumi:${stack.stack}::shop::local:storage:Bucket::archive`, before?.id]]);
      expect(ops(await engine.preview(stack, renamed, {}))).toEqual(['same archive']);
    });

    it("when a resource imports a target resource of the tenant, then the apply adopts it without creating one; another tenant's id is not found", async () => {
      const existing = await cloud.create(target, { scope: 'tenant-a', urn: 'urn:pulumi:legacy::ops::local:storage:Bucket::old-logs', type: 'local:storage:Bucket', properties: { tier: 'hot' } });
      const theirs = await cloud.create(target, { scope: 'tenant-b', urn: 'urn:pulumi:legacy::ops::local:storage:Bucket::old-logs', type: 'local:storage:Bucket', properties: { tier: 'hot' } });
      const importing = (id: string, tier = 'hot') => project(`  logs:\n    type: local:storage:Bucket\n    properties: { tier: ${tier} }\n    options:\n      import: ${id}\n  app:\n    type: local:web:App\n    properties:\n      logs: \${logs.id}\n`);
      await expect(engine.preview(stack, importing(existing.id, 'cold'), {})).rejects.toMatchObject({ code: 'IAC.IMPORT_MISMATCH', details: { paths: ['tier'] } });
      await expect(engine.preview(stack, importing(theirs.id), {})).rejects.toMatchObject({ code: 'IAC.IMPORT_NOT_FOUND' });
      await expect(engine.preview({ ...stack, tenant: 'tenant-b' }, importing(existing.id), {})).rejects.toMatchObject({ code: 'IAC.IMPORT_NOT_FOUND' });

      log.calls.length = 0;
      const { plan, result } = await apply(importing(existing.id));
      expect(plan.steps.map((s) => [s.op, s.name, s.import])).toEqual([
        ['create', 'logs', existing.id],
        ['create', 'app', undefined],
      ]);
      expect(result.resources.map((r) => [r.name, r.status, r.id])).toEqual([
        ['logs', 'succeeded', existing.id],
        ['app', 'succeeded', expect.any(String)],
      ]);
      expect(log.calls).toEqual([expect.stringMatching(/^create app /)]);
      expect((await inTarget('app'))[0]?.properties.logs).toBe(existing.id);
      // Adopted: from now on it is among the stack's resources in the target, as inventory's scans read them.
      expect((await cloud.listStack(target, stack)).map((r) => r.id)).toContain(existing.id);
      expect((await cloud.get(target, theirs.id))?.urn).toBe('urn:pulumi:legacy::ops::local:storage:Bucket::old-logs');
      expect(ops(await engine.preview(stack, importing(existing.id), {}))).toEqual(['same logs', 'same app']);
    });

    it("when a get resource reads a tenant's resource, then its outputs are what the target holds and it is never created or deleted; another tenant's is not found", async () => {
      const shared = await cloud.create(target, { scope: 'tenant-a', urn: 'urn:pulumi:prod::network::local:network:VirtualNetwork::hub', type: 'local:network:VirtualNetwork', properties: { cidr: '10.8.0.0/16' } });
      const reading = project(`  hub:\n    type: local:network:VirtualNetwork\n    get:\n      id: \${hubId}\n  app:\n    type: local:web:App\n    properties:\n      cidr: \${hub.cidr}\n      net: \${hub.id}\n`, `config:\n  hubId: ${shared.id}\n`);
      log.calls.length = 0;
      const { plan, result } = await apply(reading);
      expect(plan.steps.map((s) => [s.op, s.name, s.read])).toEqual([
        ['same', 'hub', true],
        ['create', 'app', undefined],
      ]);
      expect(result.status).toBe('applied');
      expect(result.resources.map((r) => [r.name, r.read])).toEqual([
        ['hub', true],
        ['app', undefined],
      ]);
      // The environment does not hold what it only reads: inventory is not told to look for it among the stack's.
      const applied = specificationAppliedOf(aRun(stack), 'https://git.example.com/shop.git', result);
      expect((applied.data.resources as { urn: string }[]).map((r) => r.urn)).toEqual([`urn:pulumi:${stack.stack}::shop::local:web:App::app`]);
      expect((await inTarget('app'))[0]?.properties).toEqual({ cidr: '10.8.0.0/16', net: shared.id });
      expect((await state())?.resources.find((r) => r.name === 'hub')).toMatchObject({ external: true, id: shared.id, outputs: { cidr: '10.8.0.0/16', id: shared.id } });
      expect(log.calls).toEqual([expect.stringMatching(/^create app /)]);

      // What the target holds is read again by every plan.
      await cloud.update(target, shared.id, { cidr: '10.9.0.0/16' });
      expect((await engine.preview(stack, reading, {})).steps.map((s) => [s.op, s.changedPaths])).toEqual([
        ['same', []],
        ['update', ['cidr']],
      ]);
      await expect(engine.preview({ ...stack, tenant: 'tenant-b' }, reading, {})).rejects.toMatchObject({ code: 'IAC.GET_NOT_FOUND', details: { id: shared.id } });

      log.calls.length = 0;
      await apply(project(`  other:\n    type: local:a:B\n`));
      expect(log.calls.filter((c) => c === `delete ${shared.id}`)).toEqual([]);
      expect(await cloud.get(target, shared.id)).toBeDefined();
    });

    it("when a get's id is another get's output, then the plan reads them one after the other", async () => {
      const spoke = await cloud.create(target, { scope: 'tenant-a', urn: 'urn:pulumi:prod::network::local:network:VirtualNetwork::spoke', type: 'local:network:VirtualNetwork', properties: { cidr: '10.7.0.0/16' } });
      const hub = await cloud.create(target, { scope: 'tenant-a', urn: 'urn:pulumi:prod::network::local:network:VirtualNetwork::hub', type: 'local:network:VirtualNetwork', properties: { peer: spoke.id } });
      const chained = project(`  hub:\n    type: local:network:VirtualNetwork\n    get:\n      id: ${hub.id}\n  spoke:\n    type: local:network:VirtualNetwork\n    get:\n      id: \${hub.peer}\n`, 'outputs:\n  spokeCidr: ${spoke.cidr}\n');
      const { plan, result } = await apply(chained);
      expect(plan.outputs).toEqual({ spokeCidr: '10.7.0.0/16' });
      expect(result.outputs).toEqual({ spokeCidr: '10.7.0.0/16' });
    });

    it('when a resource names an explicit provider, then the provider is a resource in the target and the state records which provider each resource uses', async () => {
      const files = project(`  west:\n    type: pulumi:providers:local\n    properties: { region: west }\n  logs:\n    type: local:storage:Bucket\n    options:\n      provider: \${west}\n      version: 2.1.0\n  app:\n    type: local:web:App\n`);
      const { result } = await apply(files);
      expect(result.status).toBe('applied');
      expect((await inTarget('west'))[0]).toMatchObject({ type: 'pulumi:providers:local', properties: { region: 'west' } });
      expect((await state())?.resources.map((r) => [r.name, r.provider, r.version])).toEqual([
        ['west', undefined, undefined],
        ['logs', `urn:pulumi:${stack.stack}::shop::pulumi:providers:local::west`, '2.1.0'],
        ['app', `urn:pulumi:${stack.stack}::shop::pulumi:providers:local::default`, undefined],
      ]);
      // A resource moved to another provider is replaced, as Pulumi replaces it.
      const toDefault = project(`  west:\n    type: pulumi:providers:local\n    properties: { region: west }\n  logs:\n    type: local:storage:Bucket\n    options:\n      version: 2.1.0\n  app:\n    type: local:web:App\n`);
      const moved = (await engine.preview(stack, toDefault, {})).steps;
      expect(moved.map((s) => [s.op, s.name])).toEqual([
        ['same', 'west'],
        ['replace', 'logs'],
        ['same', 'app'],
      ]);
    });

    it("when a program reads the stack's context, then it is the stack's: organization is its tenant", async () => {
      const { plan } = await apply(project(`  logs:\n    type: local:storage:Bucket\n    properties:\n      name: \${pulumi.organization}-\${pulumi.project}-\${pulumi.stack}\n`));
      expect(plan.steps[0]?.inputs).toEqual({ name: `tenant-a-shop-${stack.stack}` });
      expect((await inTarget('logs'))[0]?.properties).toEqual({ name: `tenant-a-shop-${stack.stack}` });
    });

    it('when a resource property invokes a std function, then plan and apply compute it; another function is UNSUPPORTED', async () => {
      const invoking = (fn: string) => project(`  logs:\n    type: local:storage:Bucket\n    properties:\n      name:\n        fn::invoke:\n          function: ${fn}\n          arguments: { input: shop-logs }\n          return: result\n`);
      const { plan } = await apply(invoking('std:upper'));
      expect(plan.steps[0]?.inputs).toEqual({ name: 'SHOP-LOGS' });
      expect((await inTarget('logs'))[0]?.properties).toEqual({ name: 'SHOP-LOGS' });
      await expect(engine.preview(stack, invoking('aws:s3:getBucket'), {})).rejects.toMatchObject({ code: 'IAC.UNSUPPORTED' });
    });

    it('when a stack state was written before the options existed, then it reads as without them and plans same', async () => {
      const files = project(`  logs:\n    type: local:storage:Bucket\n    properties: { tier: hot }\n`);
      const created = await cloud.create(target, { scope: stack.tenant, urn: `urn:pulumi:${stack.stack}::shop::local:storage:Bucket::logs`, type: 'local:storage:Bucket', properties: { tier: 'hot' } });
      const legacy: StackState = {
        stack: stack.stack,
        project: 'shop',
        serial: 1,
        resources: [{ urn: `urn:pulumi:${stack.stack}::shop::local:storage:Bucket::logs`, name: 'logs', type: 'local:storage:Bucket', id: created.id, inputs: { tier: 'hot' }, outputs: { tier: 'hot', id: created.id }, protect: false, dependencies: [] }],
      };
      await sqlStackStates(database.store, clock).write(stack, legacy);
      expect(ops(await engine.preview(stack, files, {}))).toEqual(['same logs']);
      expect(ops(await engine.preview(stack, files, {}, { refresh: true }))).toEqual(['same logs']);
    });
  });

  describe.skipIf(skipDialect(dialect))(`local IaC engine: emulated providers on ${dialect}`, () => {
    let database: TestDatabase;
    let clock: ManualClock;
    let cloud: LocalCloud;
    let engine: LocalEngine;
    let run = 0;
    let target: string;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
    });
    afterAll(async () => {
      await database?.drop();
    });
    beforeEach(() => {
      run++;
      target = `emulation-target-${run}`;
      clock = new ManualClock('2026-03-01T10:00:00Z');
      cloud = createLocalCloud({ store: database.store, clock, ids: randomIds });
      engine = createLocalEngine({ store: database.store, clock, ids: randomIds, cloud, targetOf: () => target });
    });
    const stackOf = (tenant: string): StackRef => ({ tenant, project: 'shop', stack: `dev-${run}` });
    const state = (stack: StackRef) => sqlStackStates(database.store, clock).read(stack);
    async function apply(stack: StackRef, files: ProjectFiles) {
      const plan = await engine.preview(stack, files, {});
      return { plan, result: await engine.apply(stack, files, {}, plan, noReferences) };
    }

    const RANDOMS = (keeper = 'v1') => project(
      `  pw:\n    type: random:RandomPassword\n    properties:\n      length: 20\n      minNumeric: 3\n      minSpecial: 2\n      keepers: { image: ${keeper} }\n` +
        `  token:\n    type: random:RandomString\n    properties: { length: 12, special: false }\n` +
        `  suffix:\n    type: random:RandomId\n    properties: { byteLength: 4 }\n` +
        `  port:\n    type: random:RandomInteger\n    properties: { min: 8000, max: 8999 }\n` +
        `  pet:\n    type: random:RandomPet\n    properties: { length: 3 }\n` +
        `  uuid:\n    type: random:RandomUuid\n` +
        `  order:\n    type: random:RandomShuffle\n    properties: { inputs: [a, b, c, d], resultCount: 2 }\n` +
        `  db:\n    type: local:sql:Database\n    properties:\n      password: \${pw.result}\n      name: db-\${suffix.hex}\n      port: \${port.result}\n      host: \${pet.id}\n      instance: \${uuid.result}\n      zones: \${order.results}\n      token: \${token.result}\n`,
      'outputs:\n  password: ${pw.result}\n  pet: ${pet.id}\n',
    );

    it('when random resources are applied, then their outputs are the provider\'s, kept in the state; the secret reaches the target only and is [secret] elsewhere; the next plan is all same', async () => {
      const stack = stackOf('tenant-a');
      const { plan, result } = await apply(stack, RANDOMS());
      expect(plan.counts.create).toBe(8);
      expect(result.status).toBe('applied');
      const outputs = Object.fromEntries(((await state(stack))?.resources ?? []).map((r) => [r.name, r.outputs]));
      const password = outputs.pw?.result as string;
      expect(password).toMatch(/^.{20}$/);
      expect(password.replace(/[^0-9]/g, '').length).toBeGreaterThanOrEqual(3);
      expect(outputs.token?.result).toMatch(/^[A-Za-z0-9]{12}$/);
      expect(outputs.suffix).toMatchObject({ hex: expect.stringMatching(/^[0-9a-f]{8}$/), b64Std: expect.any(String), b64Url: expect.any(String), dec: expect.stringMatching(/^\d+$/) });
      expect(outputs.port?.result).toEqual(expect.any(Number));
      expect(outputs.port?.result as number).toBeGreaterThanOrEqual(8000);
      expect(outputs.pet?.id).toMatch(/^[a-z]+-[a-z]+-[a-z]+$/);
      expect(outputs.uuid?.result).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      expect(outputs.order?.results).toHaveLength(2);

      const [db] = (await cloud.list(target)).filter((r) => r.urn.endsWith('::db'));
      expect(db?.properties).toEqual({
        password,
        name: `db-${outputs.suffix?.hex as string}`,
        port: outputs.port?.result,
        host: outputs.pet?.id,
        instance: outputs.uuid?.result,
        zones: outputs.order?.results,
        token: outputs.token?.result,
      });
      // Plan, receipt and the state's inputs of what reads it: masked.
      const dbState = (await state(stack))?.resources.find((r) => r.name === 'db');
      expect(dbState?.inputs.password).toBe('[secret]');
      expect(JSON.stringify(result)).not.toContain(password);
      expect(result.outputs).toEqual({ password: '[secret]', pet: outputs.pet?.id });
      const again = await engine.preview(stack, RANDOMS(), {});
      expect(again.counts).toEqual({ create: 0, update: 0, replace: 0, delete: 0, same: 8 });
      expect(JSON.stringify(again)).not.toContain(password);
    });

    it('when the keepers change, then the random resource is replaced with a new value, and what reads it gets the new value', async () => {
      const stack = stackOf('tenant-a');
      await apply(stack, RANDOMS('v1'));
      const before = (await state(stack))?.resources.find((r) => r.name === 'pw')?.outputs.result;
      const { plan, result } = await apply(stack, RANDOMS('v2'));
      expect(plan.steps.filter((s) => s.op !== 'same').map((s) => `${s.op} ${s.name}`)).toEqual(['replace pw', 'update db']);
      expect(result.status).toBe('applied');
      const after = (await state(stack))?.resources.find((r) => r.name === 'pw')?.outputs.result;
      expect(after).not.toBe(before);
      expect((await cloud.list(target)).find((r) => r.urn.endsWith('::db'))?.properties.password).toBe(after);
    });

    it('when two tenants apply the same project, stack and names, then they draw different values; a resource keeps its values until it is created again, then draws new ones', async () => {
      const a = stackOf('tenant-a');
      const b = stackOf('tenant-b');
      await apply(a, RANDOMS());
      await apply(b, RANDOMS());
      const valuesOf = async (stack: StackRef) => Object.fromEntries(((await state(stack))?.resources ?? []).map((r) => [r.name, r.outputs]));
      const ofA = await valuesOf(a);
      const ofB = await valuesOf(b);
      expect(ofA.pw?.result).not.toBe(ofB.pw?.result);
      expect(ofA.uuid?.result).not.toBe(ofB.uuid?.result);
      // Applied again unchanged: every value is the state's.
      await apply(a, RANDOMS());
      expect(await valuesOf(a)).toEqual(ofA);
      // Deleted and created again with the same tenant, urn and inputs: drawn anew, as the random provider does
      // (the draw holds fresh entropy, so no value follows from the names alone).
      await apply(a, project('  other:\n    type: local:a:B\n'));
      expect(await valuesOf(a)).not.toHaveProperty('pw');
      await apply(a, RANDOMS());
      const recreated = await valuesOf(a);
      for (const name of ['pw', 'token', 'uuid']) expect(recreated[name]?.result, name).not.toEqual(ofA[name]?.result);
    });

    it('when a pulumi:Stash is applied and its input then changes, then its output keeps the first input (an update, as Pulumi\'s Stash)', async () => {
      const stack = stackOf('tenant-a');
      const stash = (value: string) => project(`  kept:\n    type: pulumi:Stash\n    properties:\n      input: { key: [${value}] }\n`, 'outputs:\n  in: ${kept.input}\n  out: ${kept.output}\n');
      const first = await apply(stack, stash('one'));
      expect(first.result.outputs).toEqual({ in: { key: ['one'] }, out: { key: ['one'] } });
      const second = await apply(stack, stash('two'));
      expect(second.plan.steps.map((step) => step.op)).toEqual(['update']);
      expect(second.result.outputs).toEqual({ in: { key: ['two'] }, out: { key: ['one'] } });
    });

    it('when tls private keys are applied, then their PEMs are real keys (ED25519 and ECDSA drawn from the seed, RSA random), the public forms match, the private ones are secret', async () => {
      const stack = stackOf('tenant-a');
      const files = project(
        `  ed:\n    type: tls:PrivateKey\n    properties: { algorithm: ED25519 }\n  ec:\n    type: tls:PrivateKey\n    properties: { algorithm: ECDSA, ecdsaCurve: P256 }\n  rsa:\n    type: tls:PrivateKey\n    properties: { algorithm: RSA, rsaBits: 2048 }\n  app:\n    type: local:web:App\n    properties:\n      key: \${ed.privateKeyPem}\n      pub: \${ed.publicKeyOpenssh}\n`,
      );
      const { result } = await apply(stack, files);
      expect(result.status).toBe('applied');
      const outputs = Object.fromEntries(((await state(stack))?.resources ?? []).map((r) => [r.name, r.outputs]));
      for (const name of ['ed', 'ec', 'rsa']) {
        const key = createPrivateKey(outputs[name]?.privateKeyPem as string);
        expect(createPublicKey(key).export({ format: 'pem', type: 'spki' })).toBe(outputs[name]?.publicKeyPem);
        expect(outputs[name]?.publicKeyFingerprintSha256).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
      }
      expect(outputs.ed?.publicKeyOpenssh).toMatch(/^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI[A-Za-z0-9+/=]+\n$/);
      expect(outputs.ec?.publicKeyOpenssh).toMatch(/^ecdsa-sha2-nistp256 /);
      expect(outputs.rsa?.privateKeyPem).toMatch(/^-----BEGIN RSA PRIVATE KEY-----/);
      expect(outputs.ec?.privateKeyPem).toMatch(/^-----BEGIN EC PRIVATE KEY-----/);
      const app = (await cloud.list(target)).find((r) => r.urn.endsWith('::app'));
      expect(app?.properties.key).toBe(outputs.ed?.privateKeyPem);
      expect((await state(stack))?.resources.find((r) => r.name === 'app')?.inputs).toEqual({ key: '[secret]', pub: outputs.ed?.publicKeyOpenssh });
      expect(JSON.stringify(result)).not.toContain('PRIVATE KEY');
    });

    it.skipIf(!hasSshKeygen())('when tls private keys are applied, then ssh-keygen reads their privateKeyOpenssh back to their publicKeyOpenssh', async () => {
      const stack = stackOf('tenant-a');
      const files = project(`  ed:\n    type: tls:PrivateKey\n    properties: { algorithm: ED25519 }\n  ec:\n    type: tls:PrivateKey\n    properties: { algorithm: ECDSA, ecdsaCurve: P384 }\n  rsa:\n    type: tls:PrivateKey\n    properties: { algorithm: RSA, rsaBits: 2048 }\n`);
      expect((await apply(stack, files)).result.status).toBe('applied');
      const directory = mkdtempSync(join(tmpdir(), 'rch-ssh-'));
      try {
        for (const r of (await state(stack))?.resources ?? []) {
          const file = join(directory, r.name);
          writeFileSync(file, r.outputs.privateKeyOpenssh as string, { mode: 0o600 });
          const derived = execFileSync('ssh-keygen', ['-y', '-f', file], { encoding: 'utf8' });
          expect(derived.trim(), r.name).toBe((r.outputs.publicKeyOpenssh as string).trim());
        }
      } finally {
        rmSync(directory, { recursive: true, force: true });
      }
    });

    it('when a self-signed certificate is applied, then certPem is an X.509 certificate its key verifies, with the subject, names, uses and validity asked for', async () => {
      const stack = stackOf('tenant-a');
      const files = project(
        `  key:\n    type: tls:PrivateKey\n    properties: { algorithm: ECDSA, ecdsaCurve: P256 }\n` +
          `  cert:\n    type: tls:SelfSignedCert\n    properties:\n      privateKeyPem: \${key.privateKeyPem}\n      validityPeriodHours: 48\n      subject: { commonName: shop.local, organization: Shop }\n      dnsNames: [shop.local, www.shop.local]\n      ipAddresses: [10.0.0.7]\n      allowedUses: [digital_signature, key_encipherment, server_auth]\n      setSubjectKeyId: true\n`,
        'outputs:\n  cert: ${cert.certPem}\n',
      );
      const { result } = await apply(stack, files);
      expect(result.status).toBe('applied');
      const outputs = Object.fromEntries(((await state(stack))?.resources ?? []).map((r) => [r.name, r.outputs]));
      const certificate = new X509Certificate(outputs.cert?.certPem as string);
      expect(certificate.verify(createPublicKey(outputs.key?.publicKeyPem as string))).toBe(true);
      expect(certificate.subject).toBe('O=Shop\nCN=shop.local');
      expect(certificate.issuer).toBe(certificate.subject);
      expect(certificate.subjectAltName).toBe('DNS:shop.local, DNS:www.shop.local, IP Address:10.0.0.7');
      expect(certificate.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']);
      expect(certificate.ca).toBe(false);
      expect(new Date(certificate.validFrom).toISOString()).toBe('2026-03-01T10:00:00.000Z');
      expect(new Date(certificate.validTo).toISOString()).toBe('2026-03-03T10:00:00.000Z');
      expect(outputs.cert).toMatchObject({ keyAlgorithm: 'ECDSA', validityStartTime: '2026-03-01T10:00:00Z', validityEndTime: '2026-03-03T10:00:00Z', readyForRenewal: false, id: BigInt(`0x${certificate.serialNumber}`).toString() });
      // The certificate is no secret; the key it was signed with is.
      expect(result.outputs.cert).toBe(outputs.cert?.certPem);
      expect((await state(stack))?.resources.find((r) => r.name === 'cert')?.inputs.privateKeyPem).toBe('[secret]');
    });

    it('when a command resource is in the program, then the preview refuses it and nothing runs', async () => {
      await expect(engine.preview(stackOf('tenant-a'), project(`  run:\n    type: command:local:Command\n    properties: { create: echo hi }\n`), {})).rejects.toMatchObject({ code: 'IAC.UNSUPPORTED' });
    });
  });
}

describe('stack states written by runner jobs', () => {
  it('when a job writes a state with the option members, then the host keeps them (they are not stripped)', () => {
    const written = {
      stack: 'dev',
      project: 'shop',
      serial: 2,
      resources: [
        {
          urn: 'u',
          name: 'n',
          type: 't:t:T',
          id: 'i',
          inputs: {},
          outputs: { result: 'x' },
          protect: false,
          dependencies: [],
          parent: 'p',
          provider: 'urn:pulumi:dev::shop::pulumi:providers:t::default',
          retainOnDelete: true,
          deletedWith: 'd',
          secretOutputs: ['result'],
          external: true,
          pendingDelete: true,
          replacementTrigger: { a: 1 },
          version: '1.0.0',
          customTimeouts: { create: '5m' },
        },
      ],
    };
    expect(stackStateSchema.parse(written)).toEqual(written);
  });
});
