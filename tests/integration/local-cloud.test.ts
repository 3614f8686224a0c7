import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLocalCloud, type LocalCloud } from '../../shared/platform/cloud/local-cloud';
import { ManualClock, randomIds } from '../../shared/platform/time/clock';
import { refusal } from '../support/refusal';
import { createTestDatabase, DIALECTS, skipDialect, type TestDatabase } from '../support/databases';


for (const dialect of DIALECTS) {
  describe.skipIf(skipDialect(dialect))(`local cloud on ${dialect}`, () => {
    let database: TestDatabase;
    let clock: ManualClock;
    let cloud: LocalCloud;
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
      target = `target-${run}`;
      clock = new ManualClock('2026-03-01T10:00:00Z');
      cloud = createLocalCloud({ store: database.store, clock, ids: randomIds });
    });

    it('when resources are created, updated and deleted, then get and list show exactly the current ones with their times', async () => {
      const a = await cloud.create(target, { urn: 'urn:a', type: 'local:web:App', properties: { size: 1, tags: { env: 'dev' } } });
      clock.advance(1000);
      const b = await cloud.create(target, { urn: 'urn:b', type: 'local:sql:Database', properties: { sku: 'basic' } });
      clock.advance(1000);
      const updated = await cloud.update(target, a.id, { size: 2 });

      expect(a.id).not.toBe(b.id);
      expect(updated).toEqual({ ...a, properties: { size: 2 }, updatedAt: '2026-03-01T10:00:02.000Z' });
      expect(await cloud.get(target, a.id)).toEqual(updated);
      expect((await cloud.list(target)).map((r) => r.urn)).toEqual(['urn:a', 'urn:b']);
      expect(await cloud.list(`${target}-other`)).toEqual([]);

      expect(await cloud.delete(target, b.id)).toBe(true);
      expect(await cloud.delete(target, b.id)).toBe(false);
      expect(await cloud.get(target, b.id)).toBeUndefined();
      expect((await cloud.list(target)).map((r) => r.id)).toEqual([a.id]);
    });

    it('when a resource that does not exist is updated, then NOT_FOUND', async () => {
      expect(await refusal(cloud.update(target, 'lcr_missing', {}))).toMatchObject({ code: 'LOCAL_CLOUD.NOT_FOUND', kind: 'not-found' });
    });

    it('when a target is switched unreachable, then every resource call fails with TARGET_UNREACHABLE until it is switched back', async () => {
      const a = await cloud.create(target, { urn: 'urn:a', type: 'local:web:App', properties: {} });
      expect(await cloud.isReachable(target)).toBe(true);

      await cloud.setReachable(target, false);
      expect(await cloud.isReachable(target)).toBe(false);
      const calls: (() => Promise<unknown>)[] = [
        () => cloud.create(target, { urn: 'urn:b', type: 'local:web:App', properties: {} }),
        () => cloud.update(target, a.id, { x: 1 }),
        () => cloud.delete(target, a.id),
        () => cloud.get(target, a.id),
        () => cloud.list(target),
        () => cloud.recordApply(target, { stack: 's', planDigest: 'sha256:x' }),
      ];
      for (const call of calls) {
        expect(await refusal(call())).toMatchObject({ code: 'PROVISIONING.TARGET_UNREACHABLE', kind: 'unavailable', details: { target } });
      }
      // Another target is not affected.
      await expect(cloud.list(`${target}-other`)).resolves.toEqual([]);

      await cloud.setReachable(target, true);
      await cloud.setReachable(target, true);
      expect((await cloud.list(target)).map((r) => ({ id: r.id, properties: r.properties }))).toEqual([{ id: a.id, properties: {} }]);
    });

    it('when applies are recorded, then they are counted per target and stack, oldest first', async () => {
      await cloud.recordApply(target, { stack: 'dev', planDigest: 'sha256:1' });
      clock.advance(5);
      await cloud.recordApply(target, { stack: 'prod', planDigest: 'sha256:2' });
      await cloud.recordApply(target, { stack: 'dev', planDigest: 'sha256:3' });
      expect((await cloud.applies(target, 'dev')).map((a) => a.planDigest)).toEqual(['sha256:1', 'sha256:3']);
      expect(await cloud.applies(target)).toHaveLength(3);
      expect((await cloud.applies(target))[1]).toEqual({ target, stack: 'prod', planDigest: 'sha256:2', appliedAt: '2026-03-01T10:00:00.005Z' });
    });
  });
}
