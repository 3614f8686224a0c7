import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLocalCloudObserver } from '../../local/cloud/local-cloud-observer.adapter';
import type { ObservationScope, Observer } from '../../shared/inventory/observer';
import { createLocalCloud, type LocalCloud } from '../../local/cloud/local-cloud';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';
import { refusal } from '../support/refusal';

/** The tenant whose scope the resources of these tests are in, unless a test says otherwise. */
const TENANT = 'tenant-a';

for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`local cloud observer on ${dialect}`, () => {
    let database: TestDatabase;
    let cloud: LocalCloud;
    let observer: Observer;
    let target: string;
    let run = 0;

    beforeAll(async () => {
      database = await createTestDatabase(dialect);
    });
    afterAll(async () => {
      await database?.drop();
    });
    beforeEach(() => {
      // Each test has its own target in the file's database.
      run++;
      target = `observed-${run}`;
      cloud = createLocalCloud({ store: database.store, clock: new ManualClock('2026-03-01T10:00:00Z'), ids: randomIds });
      observer = createLocalCloudObserver({ cloud });
    });

    /** The scope of the test tenant's environment `env-<stack>`, of stack `<stack>` of project `app`. */
    const scope = (stack: string, overrides: Partial<ObservationScope> = {}): ObservationScope => ({
      tenant: TENANT,
      environmentId: `env-${stack}`,
      stack: { tenant: TENANT, project: 'app', stack },
      target,
      ...overrides,
    });
    const live = () => ({ signal: new AbortController().signal });

    it("when stacks share the target, then an environment observes exactly its stack of its tenant's scope: urn, type, id and properties", async () => {
      const api = await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:dev::app::local:web:App::api', type: 'local:web:App', properties: { size: 2, tags: { env: 'dev' }, hosts: ['a', 'b'], owner: null } });
      await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:dev-2::app::local:web:App::api', type: 'local:web:App', properties: {} });
      const db = await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:dev::app::local:sql:Database::db', type: 'local:sql:Database', properties: { sku: 'basic' } });
      await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:prod::app::local:web:App::api', type: 'local:web:App', properties: {} });
      await cloud.create(`${target}-other`, { scope: TENANT, urn: 'urn:pulumi:dev::app::local:web:App::elsewhere', type: 'local:web:App', properties: {} });
      // Another tenant's stack of the same project and stack names, and another project's stack of the same name.
      const theirs = await cloud.create(target, { scope: 'tenant-b', urn: 'urn:pulumi:dev::app::local:web:App::api', type: 'local:web:App', properties: {} });
      await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:dev::app-2::local:web:App::api', type: 'local:web:App', properties: {} });

      expect(observer.name).toBe('local-cloud');
      expect(await observer.observe(scope('dev'), live())).toEqual([
        { urn: 'urn:pulumi:dev::app::local:web:App::api', type: 'local:web:App', id: api.id, properties: { size: 2, tags: { env: 'dev' }, hosts: ['a', 'b'], owner: null } },
        { urn: 'urn:pulumi:dev::app::local:sql:Database::db', type: 'local:sql:Database', id: db.id, properties: { sku: 'basic' } },
      ]);
      expect((await observer.observe(scope('dev-2'), live())).map((r) => r.urn)).toEqual(['urn:pulumi:dev-2::app::local:web:App::api']);
      expect(await observer.observe(scope('staging'), live())).toEqual([]);
      const otherTenant = { tenant: 'tenant-b', stack: { tenant: 'tenant-b', project: 'app', stack: 'dev' } };
      expect((await observer.observe(scope('dev', otherTenant), live())).map((r) => r.id)).toEqual([theirs.id]);
    });

    it('when a resource was changed out of band, then the observation shows its current properties', async () => {
      const api = await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:dev::app::local:web:App::api', type: 'local:web:App', properties: { size: 1 } });
      await cloud.update(target, api.id, { size: 3 });
      expect(await observer.observe(scope('dev'), live())).toEqual([{ urn: api.urn, type: api.type, id: api.id, properties: { size: 3 } }]);
    });

    it('when the target is unreachable, then INVENTORY.TARGET_UNREACHABLE (unavailable) naming the target, and it observes again once reachable', async () => {
      await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:dev::app::local:web:App::api', type: 'local:web:App', properties: {} });
      await cloud.setReachable(target, false);

      const error = await refusal(observer.observe(scope('dev'), live()));
      expect(error).toMatchObject({
        code: 'INVENTORY.TARGET_UNREACHABLE',
        kind: 'unavailable',
        details: { observer: 'local-cloud', environmentId: 'env-dev', target },
      });
      expect(error.message).toContain(target);

      await cloud.setReachable(target, true);
      expect(await observer.observe(scope('dev'), live())).toHaveLength(1);
    });

    it('when the signal has already aborted, then INVENTORY.OBSERVE_TIMEOUT and the store is not read', async () => {
      let reads = 0;
      const counting = createLocalCloudObserver({
        cloud: {
          listStack: (t, s) => {
            reads++;
            return cloud.listStack(t, s);
          },
        },
      });
      expect(await refusal(counting.observe(scope('dev'), { signal: AbortSignal.abort() }))).toMatchObject({
        code: 'INVENTORY.OBSERVE_TIMEOUT',
        kind: 'unavailable',
        details: { observer: 'local-cloud', environmentId: 'env-dev', target },
      });
      expect(reads).toBe(0);
    });

    it('when the signal aborts while the store is being read, then INVENTORY.OBSERVE_TIMEOUT at once, without waiting for the read', async () => {
      await cloud.create(target, { scope: TENANT, urn: 'urn:pulumi:dev::app::local:web:App::api', type: 'local:web:App', properties: {} });
      let release = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      const controller = new AbortController();
      const slow = createLocalCloudObserver({
        cloud: {
          async listStack(t, s) {
            controller.abort();
            await held;
            return cloud.listStack(t, s);
          },
        },
      });

      const error = await refusal(slow.observe(scope('dev'), { signal: controller.signal }));
      expect(error).toMatchObject({ code: 'INVENTORY.OBSERVE_TIMEOUT', kind: 'unavailable' });
      release();
    });

    it('when the local cloud fails otherwise, then the error passes through unchanged (it is not an unreachable target)', async () => {
      const failing = createLocalCloudObserver({ cloud: { listStack: () => Promise.reject(new Error('store closed')) } });
      await expect(failing.observe(scope('dev'), live())).rejects.toThrow(/^store closed$/);
    });
  });
}
